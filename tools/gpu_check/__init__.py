"""GPU check (make gpu-check) and the wheels a GPU machine without internet needs (make gpu-wheels)."""
