"""The bundled distributed trainer: `hpcdl train RECIPE` or `python -m hpcdl.train RECIPE`."""
