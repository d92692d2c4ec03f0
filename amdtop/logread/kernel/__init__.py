"""GPU faults from the kernel log: parse amdgpu/KFD/RAS/NVRM lines (``parser``), read them from ``/dev/kmsg``,
``journalctl -k`` or a file (``sources``), and map each fault to its GPU, worker and rank (``mapper``) as
``gpu_fault`` flags (``monitor``)."""
