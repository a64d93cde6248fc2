"""``python train.py --help`` names both checkpoint files of a run and what each is for."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_help_names_ckpt_pt_and_best_pt():
    proc = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out_dir = next(line for line in proc.stdout.splitlines() if line.strip().startswith("--out_dir "))
    assert "ckpt.pt" in out_dir and "best.pt" in out_dir
    ckpt = out_dir[out_dir.index("ckpt.pt"):out_dir.index("best.pt")]
    best = out_dir[out_dir.index("best.pt"):]
    assert "latest" in ckpt and "resume" in ckpt  # what a resumed run continues from
    assert "best" in best and "final evaluation" in best  # the weights the final evaluation uses
    init_from = next(line for line in proc.stdout.splitlines() if line.strip().startswith("--init_from "))
    assert "ckpt.pt" in init_from and "not best.pt" in init_from
