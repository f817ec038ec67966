"""Submission-style output: the MLPerf submission tree, system description and checker."""
