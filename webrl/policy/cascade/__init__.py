"""Decision heads with a confidence cascade: small heads on the frozen generator's state choose
the action kind, target and value; confident steps are decided without decoding.

    policy.py     CascadePolicy: heads decide when confident, else the generator decodes
    heads.py      DecisionHeads (kind / target / value heads), load_heads, save_heads
    features.py   MarkedObservation, the step features the heads read (prompt state, element boxes)
    train.py      `webrl heads-train`: heads on logged steps with the generator frozen
    synthetic.py  a synthetic Set-of-Mark step task with rendered screenshots (heads without a browser)

Modules load torch: import them directly (`from webrl.policy.cascade.policy import CascadePolicy`);
the config (`CascadeConfig`, `CascadeWrapperConfig`) lives in webrl.policy.stack.
"""
