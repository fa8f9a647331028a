"""Rollouts: the multi-turn tool loop, chat rendering and gold trajectories (DESIGN §3, §5);
the engines they sample from are in :mod:`slca.generation`."""
