"""Sweeps: many training or evaluation runs from one command (shell scripts and the evaluation runner)."""
