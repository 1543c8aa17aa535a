"""The recovery service (the thesis, §4.6): find the bytes a file lost on failed OSTs and patch
exactly those ranges back from the file's remote source, on substitute OSTs.

Data flows one way: failure -> lost ranges (:mod:`.reconstruct`; one file's attempt in
:mod:`.rebuilding`) -> patch plan (:mod:`.plan`, the replica-selection solver) -> ranged
transfers (:mod:`.patching`, :mod:`scratchkeeper.transfer.ranged`) -> verified file.
:mod:`.service` is the daemon (``scratchkeeper recoveryd``), :mod:`.client` its Unix-socket
protocol, :mod:`.reader` the reader that waits for a patch instead of failing, :mod:`.hook` the
pre-execution check.
"""
