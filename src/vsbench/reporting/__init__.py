"""Reporting: runs compared from MLflow (leaderboard, HTML report), the nightly regression check,
and the plots the steps log. Reads what the steps recorded; never runs a step."""
