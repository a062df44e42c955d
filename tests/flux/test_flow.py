"""Rectified-flow arithmetic and its draws: keyed per sample, or one stream per rank."""

from __future__ import annotations

import torch

from flux.flow import TRAIN_DRAWS, clean_latents, keyed_draws, noised, stream_draws

SHAPE = (16, 4, 4)


def test_keyed_draws_belong_to_the_sample_not_to_the_batch_it_is_in():
    ids = torch.tensor([3, 7, 11, 19])
    whole = keyed_draws(seed=1, purpose=TRAIN_DRAWS, step=5, sample_ids=ids, latent_shape=SHAPE, cfg_dropout=0.5)
    half = keyed_draws(seed=1, purpose=TRAIN_DRAWS, step=5, sample_ids=ids[2:], latent_shape=SHAPE, cfg_dropout=0.5)
    assert torch.equal(whole.noise[2:], half.noise) and torch.equal(whole.t[2:], half.t)
    assert torch.equal(whole.posterior[2:], half.posterior) and torch.equal(whole.drop_text[2:], half.drop_text)
    later = keyed_draws(seed=1, purpose=TRAIN_DRAWS, step=6, sample_ids=ids, latent_shape=SHAPE, cfg_dropout=0.5)
    assert not torch.equal(whole.noise, later.noise)  # a sample seen again at another step gets new numbers
    other_seed = keyed_draws(seed=2, purpose=TRAIN_DRAWS, step=5, sample_ids=ids, latent_shape=SHAPE, cfg_dropout=0.5)
    assert not torch.equal(whole.t, other_seed.t)
    assert ((whole.t >= 0) & (whole.t < 1)).all()


def test_cfg_dropout_rate_and_the_stream_draws():
    ids = torch.arange(4000)
    draws = keyed_draws(seed=0, purpose=TRAIN_DRAWS, step=0, sample_ids=ids, latent_shape=(1,), cfg_dropout=0.1)
    assert 0.08 < draws.drop_text.float().mean() < 0.12
    none = keyed_draws(seed=0, purpose=TRAIN_DRAWS, step=0, sample_ids=ids[:50], latent_shape=(1,), cfg_dropout=0.0)
    assert not none.drop_text.any()
    generator = torch.Generator().manual_seed(3)
    first = stream_draws(generator, batch=4, latent_shape=SHAPE, cfg_dropout=0.1)
    second = stream_draws(generator, batch=4, latent_shape=SHAPE, cfg_dropout=0.1)
    assert first.noise.shape == (4, *SHAPE) and not torch.equal(first.noise, second.noise)


def test_the_flow_path_and_its_velocity_target():
    mean = torch.full((2, *SHAPE), 0.5)
    logvar = torch.full((2, *SHAPE), -2.0)
    eps = torch.ones(2, *SHAPE)
    x0 = clean_latents(mean, logvar, eps, shift=0.1159, scale=0.3611)
    expected = (0.5 + torch.exp(torch.tensor(-1.0)) - 0.1159) * 0.3611
    assert torch.allclose(x0, torch.full_like(x0, float(expected)))
    noise = torch.randn(2, *SHAPE)
    x_t, target = noised(x0, noise, torch.tensor([0.0, 1.0]))
    assert torch.equal(x_t[0], x0[0]) and torch.equal(x_t[1], noise[1])  # t=0 is the data, t=1 pure noise
    assert torch.equal(target, noise - x0)
