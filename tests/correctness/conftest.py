"""Correctness tests: results checked against independent computations (known answers, values
worked by hand, the rules' own texts, stand-in logs and servers).

This folder does not mirror a folder of mlperf_mig on purpose: each check follows one number
through several folders (a known answer through engines, harness, runner and LoadGen; a threshold
through harness, submission and study), so it belongs to none of them. Tests of one folder's own
behaviour live in tests/<folder>.
"""
