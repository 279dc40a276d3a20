print("keychainfs-bench: not written yet")
