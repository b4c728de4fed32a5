"""Memory sources for leak detection: Ascend HBM (npu-smi, DCMI), CUDA (NVML), host RSS (psutil).

:mod:`.npusmi` parses captured ``npu-smi`` output (pure); :mod:`.sources` samples live memory
behind one small interface, :class:`~.sources.MemorySource`, chosen by platform with
:func:`~.sources.select_sources`.
"""
