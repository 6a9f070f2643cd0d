"""Graph passes."""
