import os
test_pipeline = [dict(type='LoadMultiViewImageFromFiles')]
