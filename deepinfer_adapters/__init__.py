"""deepinfer-adapters: DeepSeek-V4-Flash and V4.1-Flash in PyTorch."""
