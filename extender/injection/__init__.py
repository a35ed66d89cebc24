"""Pure job-wiring render: names, hostfiles, env, SSH material, JSONPatch, admission responses."""
