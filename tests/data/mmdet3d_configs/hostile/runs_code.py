# A config that would run code if it were executed: the reader must refuse it, never run it.
img_norm_cfg = dict(mean=[0, 0, 0], std=[1, 1, 1], to_rgb=False)
marker = __import__('pathlib').Path('DVPIPE_CONFIG_WAS_EXECUTED').touch()
