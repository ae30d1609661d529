"""webrl.kernels: fused token log-prob / entropy kernels with pure-torch reference paths."""
