"""smartsensor: one namespace for the service (entry points, service, domain, ports, adapters) and its
sensor library (``smartsensor.sensors``) and schema (``smartsensor.schema``). ARCHITECTURE.md draws the layers."""
