# DANet on this machine for configs/lra/listops_cpu.py: 3 DANet layers, one local / shifted-local /
# global cycle (27 C^2 block parameters against the 2 transformer layers' 24 C^2), the window of
# the authors' ListOps config (20), FFN l_inf rescaling at 1 / sqrt(8 C) for C = 64.
#   python train.py configs/lra/listops_cpu.py configs/attention/dense.py configs/lra/dense/listops_cpu.py
n_layer = 3
layer_scheme = "LSG"
window = 20
ffn_linf_norm = 0.04419
