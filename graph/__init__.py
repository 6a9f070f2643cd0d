"""Kiln."""
