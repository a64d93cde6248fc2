"""``python train.py --help`` names both checkpoint files of a run and what each is for, in lines of at
most 100 columns."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def entries(text):
    """key -> its whole --help entry (the name's line and the meaning's continuation lines, joined)."""
    out, key = {}, None
    for line in text.splitlines():
        if line.startswith("  --"):
            key = line.split()[0][2:]
            out[key] = line.strip()
        elif key and line.startswith("    "):
            out[key] += " " + line.strip()
        else:
            key = None
    return out


def test_help_names_ckpt_pt_and_best_pt():
    proc = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert max(len(line) for line in proc.stdout.splitlines()) <= 100  # wrapped at 100 columns
    by_key = entries(proc.stdout)
    out_dir = by_key["out_dir"]
    assert "ckpt.pt" in out_dir and "best.pt" in out_dir
    ckpt = out_dir[out_dir.index("ckpt.pt"):out_dir.index("best.pt")]
    best = out_dir[out_dir.index("best.pt"):]
    assert "latest" in ckpt and "resume" in ckpt  # what a resumed run continues from
    assert "best" in best and "final evaluation" in best  # the weights the final evaluation uses
    init_from = by_key["init_from"]
    assert "ckpt.pt" in init_from and "not best.pt" in init_from
