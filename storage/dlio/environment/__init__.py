"""DLIO's own environments (.venv-dlio for 2.0.0, .venv-dlio3 for 3.0.x: dlio_env.py and the setup scripts)
and the rate at which DLIO 2.0.0's generator writes each benchmark's data (datagen_rate.py)."""
