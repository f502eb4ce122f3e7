"""The models in plain PyTorch; host-agnostic."""
