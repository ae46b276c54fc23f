
mlp *

fc0.weight *
fc0.bias *

fc1.weight *
fc1.bias2/{®Gáz„?1{®Gáz„?I»½×Ùß|Û=aü©ñÒMbP?iš™™™™™¹?8€€€@@J
