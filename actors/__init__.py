"""Typed actors of the RL loop and the engines behind them."""
