"""Engines: the model-running code behind the generator and trainer actors."""
