# A launcher as teams write them (msMemScope's docs profile `bash user.sh`):
# the environment, then the training script. Run from the repository's root.
export OMP_NUM_THREADS=1
python3 bench/views/gpt_keep_loss.py
