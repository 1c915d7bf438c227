"""One model definition per family, driven by YAML configs (full size and cuts)."""
