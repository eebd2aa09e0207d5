"""Shipped JSON data, loaded with importlib.resources."""
