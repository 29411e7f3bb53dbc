"""writable_gradients: each gradient its own memory, copying only what is shared."""

import torch

from bdl.closures import writable_gradients


def test_shared_and_broadcast_gradients_are_copied_disjoint_views_kept():
    flat = torch.arange(10.0)
    first, second = flat[:4], flat[4:]
    overlapping = flat[2:6]
    broadcast = torch.ones(()).expand(3)
    grads = writable_gradients((first, second, first, overlapping, broadcast))
    assert grads[0].data_ptr() == first.data_ptr()  # disjoint parts of one buffer: kept
    assert grads[1].data_ptr() == second.data_ptr()
    for copied, original in zip(grads[2:], (first, overlapping, broadcast)):
        assert copied.data_ptr() != original.data_ptr()
        assert torch.equal(copied, original)
    grads[2].add_(1)  # writing one gradient leaves the others
    assert torch.equal(grads[0], torch.arange(4.0))
