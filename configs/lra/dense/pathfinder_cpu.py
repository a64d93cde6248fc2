# DANet on this machine for configs/lra/pathfinder_cpu.py: 3 DANet layers, one local / shifted-local /
# global cycle (27 C^2 block parameters against the 2 transformer layers' 24 C^2), the window of
# the authors' Pathfinder32 config (256), FFN l_inf rescaling at 1 / sqrt(8 C) for C = 64.
#   python train.py configs/lra/pathfinder_cpu.py configs/attention/dense.py configs/lra/dense/pathfinder_cpu.py
n_layer = 3
layer_scheme = "LSG"
window = 256
ffn_linf_norm = 0.04419
