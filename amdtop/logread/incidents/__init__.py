"""Incidents: one verdict per thing that went wrong (a hang, a fabric failure, a crash, a reset), built from the many
lines that tell it, with its cause, its evidence and its fix."""
