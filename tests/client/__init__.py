"""Tests of zpar.client, one file per module (a package: names such as test_outbox.py
recur in other rooms)."""
