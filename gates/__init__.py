"""The gates C0..C10 and their primitives. Part of the apparatus: agents never edit it."""
