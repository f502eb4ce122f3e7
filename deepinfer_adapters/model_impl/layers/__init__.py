"""Building blocks shared by DeepSeek-V4-Flash and V4.1-Flash."""
