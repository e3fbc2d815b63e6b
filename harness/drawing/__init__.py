"""Drawing: the cases a check runs on (configurations Hypothesis draws, the contract's thresholds as explicit
plans, the element budget, sweep profiles) and the replay of a printed case.
"""
