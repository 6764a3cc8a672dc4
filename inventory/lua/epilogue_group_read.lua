return {seq, out}
