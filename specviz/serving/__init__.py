"""What the app's server holds for all its sessions: the pair cache (load, warm up, time the loads) and the measuring slot."""
