"""Tiering benchmark: fio Zipf random reads through the scratch mount before and after
``scratchkeeper tierd``'s hotness migration, against everything on disk and a static split
(issue 20, the SUORA paper's Figure 13). ``python -m benchmarks.tiering [--quick]``."""
