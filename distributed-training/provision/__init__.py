"""Tools that prepare a machine for the labs and carry a GPU node's results home; no lab imports them.

They run through the Makefile (`make setup`, `make doctor`, `make setup-fp8`, `make offline-kit`,
`make gpu-quick`, `make results-archive`), one concept per module:
    torch_install  `make setup`'s torch: the build that fits the NVIDIA driver from PyTorch's index, or the
                   registry's (said in one line)
    te_install     `make setup-fp8`'s TransformerEngine: its prerequisites checked, core wheel, torch extension
    wheelhouse     the optional FP8 backends' wheels downloaded for a node without internet
    doctor         `make doctor`: what this machine has (torch, CUDA, NCCL, GPUs, links, FP8 backends, preset)
    archive        one .tar.gz of every lab's results for the trip home, and its checked import

Import the submodule you need; this file imports nothing.
"""
