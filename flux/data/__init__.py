"""FLUX.1 data: the preprocessed T5/CLIP/VAE Arrow shards (Hugging Face `save_to_disk` layout), read and written."""
