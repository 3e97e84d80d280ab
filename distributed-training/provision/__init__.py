"""Tools that prepare a machine for the labs and carry a GPU node's results home; no lab imports them.

They run through the Makefile (`make setup`, `make doctor`, `make setup-fp8`, `make offline-kit`,
`make gpu-quick`, `make results-archive`), one concept per module:
    torch_install  `make setup`'s torch: the build that fits the NVIDIA driver from PyTorch's index, or the
                   registry's (said in one line)
    te_install     `make setup-fp8`'s TransformerEngine: its prerequisites checked, core wheel, torch extension
    wheelhouse     the optional FP8 backends' wheels downloaded for a node without internet
    doctor         `make doctor`: what this machine has (torch, CUDA, NCCL, GPUs, links, FP8 backends, preset)
    offline_kit    `make offline-kit`/`offline-install`: the FP8 backends' wheels for a node without network;
                   bundle: the tree and the kit against what a lent machine takes (64 MiB)
    gpu_quick      `make gpu-quick`: one short GPU slot, its inputs checked first; slot_plan (its run list and
                   estimates; committed: what a results set holds), timebox (steps under a deadline,
                   one log), quick_run (the run and its end); gpu_slot.sh: the whole command for a lent machine
    archive        one .tar.gz of every lab's results for the trip home, and its checked import

Import the submodule you need; this file imports nothing.
"""
