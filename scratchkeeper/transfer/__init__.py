"""Transfers: URIs, the real clients that move each scheme, and how their failures are classified."""
