"""Running: what a backend is and where it comes from, the devices it runs on, how each entry point is called,
and the isolation around a call (global state, exits, deadlines, fresh processes, compile and graph modes).
"""
