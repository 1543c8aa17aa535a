"""Jinja2 job templates, one folder per scheduler backend, shared pieces in common/."""
