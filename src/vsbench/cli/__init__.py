"""The ``vsbench`` command line, one module per command group (``app`` joins them); each command
parses its options, calls the library, and ends a user's mistake in one line (``common``)."""
