"""LOCI (Locator–Critic): iterative visual evidence search, as a policy wrapper and a VQA mode.

    policy.py     LociConfig, LociPolicy, gather_evidence (the Locator–Critic loop, strict parsing)
    roles.py      Locator / Critic roles from the policy's own model or an OpenAI-compatible URL;
                  loci_policy, loci_answer
    geometry.py   boxes, crops, upscaling and the composite screenshot
    synthetic.py  synthetic high-resolution questions (benchmarks/loci_vstar.py)
"""
