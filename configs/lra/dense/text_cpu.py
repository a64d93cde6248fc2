# DANet on this machine for configs/lra/text_cpu.py: 3 DANet layers, one local / shifted-local /
# global cycle (27 C^2 block parameters against the 2 transformer layers' 24 C^2), the window of
# the authors' Text config (10), FFN l_inf rescaling at 1 / sqrt(8 C) for C = 64.
#   python train.py configs/lra/text_cpu.py configs/attention/dense.py configs/lra/dense/text_cpu.py
n_layer = 3
layer_scheme = "LSG"
window = 10
ffn_linf_norm = 0.04419
