"""FLUX.1 (MLPerf Training `flux1`): rectified-flow MMDiT trained on preprocessed T5/CLIP/VAE encodings."""
