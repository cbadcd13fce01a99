"""What a platform and a job are: frozen config models validated at load, and a job's paths."""
