"""Tiny Shakespeare at the character level (``prepare.py``): the corpus of the FAST paper's
Figure 4 attention maps, used here for Fastmax's Figures 2 and 4 (issue 8)."""
