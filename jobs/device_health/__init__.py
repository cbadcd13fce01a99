"""The device_health job: per device and data point a RED/GREEN state; diagnosis on turning RED."""
