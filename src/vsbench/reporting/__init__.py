"""Reporting: runs from MLflow as records (runs), the leaderboard (leaderboard), the HTML report
(html_report), the nightly regression check (regression),
and the plots the steps log. Reads what the steps recorded; never runs a step."""
