return {tonumber(meta[3]) or 0, out}
