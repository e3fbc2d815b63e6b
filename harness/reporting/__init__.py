"""Reporting: the records of a run, their markdown and terminal forms, "Pick a kernel", the pictures, the
environment fingerprint and the merge of several runs into one matrix.
"""
