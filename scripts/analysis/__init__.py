"""Analysis tools: tables and figures from runs and checkpoints, written under results/."""
