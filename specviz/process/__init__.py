"""What a specviz process shares with the machine and the processes beside it: where its messages go (logs.py) and when
it may be stopped for another's timed run (pause_gate.py). Below every other room: it imports nothing of specviz."""
