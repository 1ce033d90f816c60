"""Folder prepended to PYTHONPATH by ``stepscope record`` (holds the injected sitecustomize).

This __init__ only makes packaging include the folder; it is never imported.
"""
