"""Developer tools the nox sessions run (not part of the installed package)."""
